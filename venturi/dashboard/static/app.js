// venturi dashboard: live updates of the values the stats table holds. Served as a file
// (the Content-Security-Policy allows no inline script). Every element with data-live="key"
// shows the value of that key in the JSON of the stats endpoint; nothing else changes.
(function () {
  "use strict";
  var body = document.body;
  var url = body.getAttribute("data-stats");
  var every = parseInt(body.getAttribute("data-refresh"), 10) || 5000;
  var storeKey = "venturi.dashboard.live";
  var timer = null;

  // Forms that ask first (deleting a job): data-confirm holds the question.
  document.querySelectorAll("form[data-confirm]").forEach(function (f) {
    f.addEventListener("submit", function (e) {
      if (!window.confirm(f.getAttribute("data-confirm"))) { e.preventDefault(); }
    });
  });

  if (!body.hasAttribute("data-live-page")) { return; }
  var state = document.getElementById("live-state");
  var toggle = document.getElementById("live-toggle");

  function paused() {
    try { return window.localStorage.getItem(storeKey) === "paused"; } catch (e) { return false; }
  }
  function setPaused(p) {
    try { window.localStorage.setItem(storeKey, p ? "paused" : "live"); } catch (e) { /* private mode */ }
  }
  function show(label, cls) {
    state.textContent = label;
    state.className = cls || "";
  }
  function apply(data) {
    body.setAttribute("data-polled", data.sampled_at || "none");
    var values = data.values || {};
    if (data.sampled_at) { values["sampled"] = data.sampled_at; }
    document.querySelectorAll("[data-live]").forEach(function (el) {
      var k = el.getAttribute("data-live");
      if (Object.prototype.hasOwnProperty.call(values, k) && el.textContent !== values[k]) {
        el.textContent = values[k];
        el.classList.add("changed");
      }
    });
  }
  function poll() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error("status " + r.status); } return r.json(); })
      .then(function (data) { apply(data); if (!paused()) { show("live"); } })
      .catch(function () { show("update failed", "failed"); });
  }
  function start() {
    stop();
    show("live");
    toggle.textContent = "Pause updates";
    poll();
    timer = window.setInterval(poll, every);
  }
  function stop() {
    if (timer !== null) { window.clearInterval(timer); timer = null; }
  }
  toggle.addEventListener("click", function () {
    if (timer === null) { setPaused(false); start(); }
    else { setPaused(true); stop(); show("paused", "paused"); toggle.textContent = "Resume updates"; }
  });
  if (paused()) {
    show("paused", "paused");
    toggle.textContent = "Resume updates";
    poll(); // one read so the sample time shows
  } else {
    start();
  }
})();
