"""The quality suite's golden set and the judge's calibration set: public, licensed data read at pinned commits."""
