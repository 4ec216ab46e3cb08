"""The Continuum fork (seed 002) as a System: upstream's scheduler with the fork's changes
(`scheduler`) and its factory (`fork`), the worked example of putting a fork under test."""
