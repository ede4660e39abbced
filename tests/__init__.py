"""jaxformer's tests (`make test`; the layout is in the README)."""

# XLA's CPU backend compiles the tests' programs at its lowest optimization level and with its
# older (elemental) fusion emitters: the suite compiles ~1,300 small programs and runs each
# once or twice, so LLVM's optimizations cost more time than they save (about a third of the
# suite's CPU time), and the MLIR fusion emitters compile slower (tests/mixers and tests/nn,
# no compilation cache: 145 CPU s with them, 90 without; BENCHMARKS.md). What the programs
# compute is the same; runs compared bit for bit run with the same flags.
XLA_TEST_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
