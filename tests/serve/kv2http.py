"""The serve tests' HTTP call (Python's standard library only; tests/serve/lib.sh puts this directory on
PYTHONPATH): http(url, method, path, body, headers) -> (status, headers with lower-case names, body bytes), an HTTP
error status returned, not raised; status_body(...) the same without the headers."""
import urllib.error
import urllib.request


def http(url, method, path, body=None, headers=None, timeout=60):
    req = urllib.request.Request(url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def status_body(url, method, path, body=None, headers=None, timeout=60):
    st, _, data = http(url, method, path, body, headers, timeout)
    return st, data
