"""Adapters: every piece of I/O (files, HTTP, subprocesses, the knowledge base on disk)."""
