"""The conformance report of a run: `writer` (conform.json + conform.html), the HTML page and its
parts (`html`, `charts`, `divergence`, `timeline`), and the index of every run (`runs`)."""
