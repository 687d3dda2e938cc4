"""Command-line entry points (argparse); the only place besides drivers that prints."""
