"""The data access layer: the only code that talks to boto3. It speaks domain models and domain errors."""
