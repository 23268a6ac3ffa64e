"""Reports: comparison tables and training-curve plots of runs (``plots``, ``tables``)."""
