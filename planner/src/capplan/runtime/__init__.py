"""Code capplan ships to run on users\x27 machines outside capplan (standard library only)."""
