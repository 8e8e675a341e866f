package server

import (
	"math"
	"strings"
	"testing"

	"github.com/venturi-dev/bookmarks/bookmarks-api/internal/httpapi"
)

func TestParseRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{"10/s": 10, "600/m": 10, "36/h": 0.01, "0.5/s": 0.5, "off": math.Inf(1), "OFF": math.Inf(1)} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10", "10/d", "/s", "x/s", "0/s", "-1/s", "NaN/s", "Inf/s", "10/S", "10 /s"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) accepted it", in)
		}
	}
}

func TestRateLimitsFromEnv(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://x")
	c, err := FromEnv()
	if err != nil || c.WriteLimit != httpapi.DefaultWriteLimit || c.ImportLimit != httpapi.DefaultImportLimit {
		t.Fatalf("defaults: %+v %+v, %v", c.WriteLimit, c.ImportLimit, err)
	}
	t.Setenv("BOOKMARKS_WRITE_RATE", "120/m")
	t.Setenv("BOOKMARKS_WRITE_BURST", "5")
	t.Setenv("BOOKMARKS_IMPORT_RATE", "off")
	c, err = FromEnv()
	if err != nil || c.WriteLimit != (httpapi.RateLimit{PerSecond: 2, Burst: 5}) || !c.ImportLimit.Off() {
		t.Fatalf("set: %+v %+v, %v", c.WriteLimit, c.ImportLimit, err)
	}
	for k, v := range map[string]string{"BOOKMARKS_WRITE_RATE": "fast", "BOOKMARKS_WRITE_BURST": "0", "BOOKMARKS_IMPORT_BURST": "x"} {
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, v)
			if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), k) {
				t.Fatalf("%s=%s: %v, want an error naming it", k, v, err)
			}
		})
	}
}

func TestImportConfirmationFromEnv(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://x")
	c, err := FromEnv()
	if err != nil || c.ImportConfirmAbove != httpapi.DefaultImportConfirmAbove || c.ImportConfirmTimeout != httpapi.DefaultImportConfirmTimeout ||
		c.PublicURL != "" {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	t.Setenv("BOOKMARKS_IMPORT_CONFIRM_ABOVE", "50")
	t.Setenv("BOOKMARKS_IMPORT_CONFIRM_TIMEOUT", "90m")
	t.Setenv("BOOKMARKS_API_PUBLIC_URL", "https://bookmarks.example.com/api/")
	c, err = FromEnv()
	if err != nil || c.ImportConfirmAbove != 50 || c.ImportConfirmTimeout.Minutes() != 90 || c.PublicURL != "https://bookmarks.example.com/api" {
		t.Fatalf("set: %+v, %v", c, err)
	}
	t.Setenv("BOOKMARKS_IMPORT_CONFIRM_ABOVE", "off")
	if c, err = FromEnv(); err != nil || c.ImportConfirmAbove != httpapi.NoImportConfirmation {
		t.Fatalf("off: %d, %v", c.ImportConfirmAbove, err)
	}
	for k, vs := range map[string][]string{
		"BOOKMARKS_IMPORT_CONFIRM_ABOVE":   {"0", "-3", "many"},
		"BOOKMARKS_IMPORT_CONFIRM_TIMEOUT": {"1ms", "soon", "-1h"},
		"BOOKMARKS_API_PUBLIC_URL":         {"bookmarks.example.com", "ftp://x", "https://u:p@x", "https://x/?a=1", "https://x/#f", "https://"},
	} {
		for _, v := range vs {
			t.Run(k+"="+v, func(t *testing.T) {
				t.Setenv(k, v)
				if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), k) {
					t.Fatalf("%s=%s: %v, want an error naming it", k, v, err)
				}
			})
		}
	}
}

func TestMaxConnsFromEnv(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://x")
	if c, err := FromEnv(); err != nil || c.MaxConns != DefaultMaxConns {
		t.Fatalf("default: %d, %v", c.MaxConns, err)
	}
	t.Setenv("BOOKMARKS_API_MAX_CONNS", "300")
	if c, err := FromEnv(); err != nil || c.MaxConns != 300 {
		t.Fatalf("set: %d, %v", c.MaxConns, err)
	}
	for _, v := range []string{"0", "-1", "lots", "2000000"} {
		t.Run(v, func(t *testing.T) {
			t.Setenv("BOOKMARKS_API_MAX_CONNS", v)
			if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), "BOOKMARKS_API_MAX_CONNS") {
				t.Fatalf("%s: %v, want an error naming the variable", v, err)
			}
		})
	}
}
