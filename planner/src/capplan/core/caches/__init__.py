"""Binary caches: narinfo parsing and cache queries as pure functions.

Pure: no I/O, no clock, no environment.
"""
