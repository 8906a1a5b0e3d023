"""The plain data every layer shares: ramps, scenarios, the result model and the user error.

It imports only the standard library and `servers.contract` (itself standard-library only),
so a driver's parser, a chart or an agent process can load it without the harness.
"""
