"""Planning a read before making it: what a store allows and charges, and which shuffle block
size reaches a throughput under those limits at what cost in mixing and requests."""
