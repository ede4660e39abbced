"""jaxformer's tests (`make test`; the layout is in the README)."""

# XLA's CPU backend compiles the tests' programs at its lowest optimization level: the suite
# compiles ~1,300 small programs and runs each once or twice, so LLVM's optimizations cost
# more time than they save (about a third of the suite's CPU time; BENCHMARKS.md). What the
# programs compute is the same; runs compared bit for bit run with the same flags.
XLA_TEST_FLAGS = "--xla_backend_optimization_level=0"
