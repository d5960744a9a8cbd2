"""firmware."""
