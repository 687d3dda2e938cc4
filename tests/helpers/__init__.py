"""Helpers shared by tests in several folders (one copy of each).

``wire``: headers and fake signatures for packet-level tests.
``waiting``: polling for a condition that has no event to wait on (files a daemon writes).
``ports``: UDP ports for processes that bind themselves, without picking a port and
releasing it for a later bind (which races with other suites on the machine).
"""
