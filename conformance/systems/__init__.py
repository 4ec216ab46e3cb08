"""What can be put under test: every implementation is a `System`.

| module | what it holds |
| --- | --- |
| `protocol` | the `System` protocol and the plain records it speaks |
| `specs` | parsing `--system` / `--against` texts (pure: nothing imported, nothing built) |
| `registry` | a parsed spec as a factory of protocol-checked systems |
| `twin` | the twin (`impl.sched`) as a System |
| `upstream/` | upstream vLLM in this process: config, events, the adapter |
| `connector` | KV connector settings and records, translated for either side |
| `continuum/` | the Continuum fork (seed 002) rebuilt on upstream, the worked example of a fork |
| `remote/` | managed environments, the worker process, its wire protocol and proxy |

Adding a System is one module here plus, for a named one, a line in `specs.NAMED_FACTORIES`.
"""
