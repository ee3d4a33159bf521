"""The HTTP edge: the routes (thin shells over `RecallService`), what every request meets before a
route runs (the API-key guard and its wrong-key throttle, the body deadline, spans and metrics), and
the one error shape, with store and broker outages answered as 503 in one place (`unavailable`)."""
