"""Our WebSocket agent (seed 000): many connections from several processes and addresses."""
