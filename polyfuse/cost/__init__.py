"""The memory-traffic model and the decisions made with it: per-tile footprints (``footprint.py``), the
traffic report of a schedule (``traffic.py``), tile-size search (``search.py``)."""

from polyfuse.cost.traffic import ArrayTraffic, KernelTraffic, TrafficReport, format_traffic, traffic

__all__ = ["ArrayTraffic", "KernelTraffic", "TrafficReport", "format_traffic", "traffic"]
