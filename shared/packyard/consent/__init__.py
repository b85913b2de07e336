"""Consent: approvals of an operation's exact plan, with Step Functions task tokens (reserved; not built yet)."""
