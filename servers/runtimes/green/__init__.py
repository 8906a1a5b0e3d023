"""Green threads on monkey-patched sockets (gevent, eventlet): one WSGI app, blocking backends."""
