"""Non-Python baselines run under the same contract: nginx, Node (http, Express), EventMachine."""
