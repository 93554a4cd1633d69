"""Byte counts as people read them (decimal units), shared by the tools/bench reports."""


def human(n):
    """1234 -> '1.2 KB', 5.6e9 -> '5.6 GB', 12 -> '12 B'."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return "%.1f %s" % (n / size, unit)
    return "%d B" % n
