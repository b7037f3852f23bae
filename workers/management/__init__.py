"""Management commands of the workers app."""
