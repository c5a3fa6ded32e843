"""Benchmark transforms: batch scaling (`scale`) and dtype changes (`dtype`) on ET node dicts."""
