"""Publishing: upload sessions, verification of every stored byte, publish or reject, and the release catalogue."""
