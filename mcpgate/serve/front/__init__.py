"""The HTTP front: the gunicorn worker and its reader (worker.py, reading.py, request_headers.py), the
request/response pair and Refusal (http.py), the pure checks (checks.py, auth.py, cors.py), the app with its
Guard and Endpoint (app.py), and what the master checks and says as it starts (preflight.py, starting.py)."""
