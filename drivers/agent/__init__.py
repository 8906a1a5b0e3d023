"""Our WebSocket agent (the WebSocket study): many connections, several processes and addresses."""
