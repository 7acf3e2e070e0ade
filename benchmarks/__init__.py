"""polyfuse benchmarks: ``python -m benchmarks run [--target c|cuda] [--quick] [--out DIR]`` (``make bench``).

:mod:`benchmarks.versus` times polyfuse's C back end against numpy, PyTorch eager, ``torch.compile`` and
gcc -O3 on the rows of :mod:`benchmarks.suite`, with the interleaved-rounds harness of
:mod:`benchmarks.harness`; :mod:`benchmarks.dnn_cuda` is the CUDA benchmark. Results go outside the source
tree unless ``--out`` says otherwise. benchmarks/README.md explains the method and the numbers.
"""
