"""One ``[lazypatch]`` entry point of an installed distribution, as plugins.py finds it
and plugin_cache.py remembers it (a module of its own: activation reads a cache that
lists none without creating the class, benchmarks/COSTS.md)."""


class PluginEntry:
    """One ``[lazypatch]`` entry point: ``target = module[:function]`` of ``distribution``."""

    __slots__ = ("distribution", "target", "value", "location", "stamp")

    def __init__(self, distribution: str, target: str, value: str, location: str) -> None:
        self.distribution = distribution   # normalised name: lower case, '_' for '-' and '.'
        self.target = target
        self.value = value
        self.location = location           # the *.dist-info directory it came from
        self.stamp = ""                    # mtime of its entry_points.txt, from the cache

    @property
    def patch_name(self) -> str:
        return f"{self.distribution}.{self.target}"

    def __repr__(self) -> str:
        return f"<PluginEntry {self.target} = {self.value} ({self.distribution})>"
