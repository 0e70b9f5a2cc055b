"""The HTTP front, in the order a request meets it: the gunicorn worker and its reader (worker.py, reading.py,
request_headers.py), what is noted of one request (context.py), the app with its Guard and Endpoint (app.py; a
Flask app only when an OAuth mode or metrics add routes, else bare.py's), the pure checks (auth.py, checks.py,
cors.py), the request/response pair and Refusal (http.py), the one reply machine (reply.py), and what the master
checks and says as it starts (preflight.py, starting.py)."""
