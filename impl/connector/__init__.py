"""KV connectors, scheduler side: the contract (`base`), its records (`types`) and the CPU
offload tier (`cpu_offload`), a twin of upstream's SimpleCPUOffloadConnector (seed 003)."""
