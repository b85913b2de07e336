"""Installation operations: admission, planning, commit and settlement, each phase in its own module.

One operation per ``(tenant, workspace, Idempotency-Key)``; every transition is a write fenced by the operation's own
version, and an installation has at most one operation in flight (its slot).
"""
