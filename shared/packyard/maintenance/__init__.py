"""Maintenance: EventBridge-scheduled sweeps over the due index (reserved; not built yet)."""
