"""The panel and /metrics over HTTP: requests, hostile ones, a real Chromium and a real Prometheus (the classes that need a browser or a scraper start them)."""
