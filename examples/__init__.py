"""Examples of systems and plugins to put under test with vtwin (not part of the package)."""
