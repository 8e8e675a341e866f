-- bookmarks application schema, version 3: bookmark.fetch_error holds a reason code.
--
-- Version 1 stored the fetcher's whole error message ("no_such_host: lookup x on
-- 10.0.0.2:53: no such host"), which the API showed to users with the resolver's and the
-- dialled addresses in it. From now on the worker stores only a reason code (dns, connect,
-- timeout, tls, http_status, too_large, blocked_address, bad_content, bad_url,
-- too_many_redirects, network) and the HTTP status in http_status; the raw error goes to
-- the worker's log. This rewrites the messages already stored as the code of their reason
-- (the word before the first space or colon) and lets no message in again.

UPDATE bookmark
SET fetch_error = CASE split_part(split_part(fetch_error, ':', 1), ' ', 1)
        WHEN 'blocked'                  THEN 'blocked_address'
        WHEN 'bad_url'                  THEN 'bad_url'
        WHEN 'too_many_redirects'       THEN 'too_many_redirects'
        WHEN 'gone'                     THEN 'http_status'
        WHEN 'http_client_error'        THEN 'http_status'
        WHEN 'http_server_error'        THEN 'http_status'
        WHEN 'rate_limited'             THEN 'http_status'
        WHEN 'body_too_large'           THEN 'too_large'
        WHEN 'unsupported_content_type' THEN 'bad_content'
        WHEN 'timeout'                  THEN 'timeout'
        WHEN 'no_such_host'             THEN 'dns'
        ELSE 'network'
    END
WHERE fetch_error <> '';

-- A code is a short lower-case word: no error message (with its addresses) fits.
ALTER TABLE bookmark ADD CONSTRAINT bookmark_fetch_error_is_a_code
    CHECK (fetch_error ~ '^[a-z_]{0,32}$');
