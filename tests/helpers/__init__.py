"""Helpers shared by the test modules (tests/<layer>/test_*.py): paths, small engines,
IR graphs and calibration graphs.  Test modules import from here, never from each other."""
