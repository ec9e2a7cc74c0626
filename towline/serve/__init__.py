"""`towline serve`: agents behind an AG-UI endpoint (server-sent events) and a small web page."""
