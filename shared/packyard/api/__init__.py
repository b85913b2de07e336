"""The HTTP contract: the resolver and its problem+json mapping, the caller's principal, typed response models."""
