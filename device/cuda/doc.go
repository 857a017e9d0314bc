// Package cuda runs gosling's device work on NVIDIA GPUs from a binary built
// with CGO_ENABLED=0: the driver API (libcuda.so.1), NVRTC (libnvrtc.so.13),
// cuBLASLt (libcublasLt.so.13) and cuBLAS (libcublas.so.13) are opened at run
// time with purego, and the kernels are CUDA C embedded in the binary,
// compiled by NVRTC for the device's compute capability on first use and
// cached on disk.
//
// Threading: a CUDA context is current per OS thread, so every CUDA call must
// happen on a locked thread whose current context is the device's. A Device
// owns one such thread; its methods hand their work to it, so they may be
// called from any goroutine. A long sequence of calls (one forward pass)
// should go inside Device.Do, which runs it on the device thread in one hop;
// the methods called from inside Do run directly.
//
// Layering, bottom up:
//
//	lib.go      where the shared libraries are searched for
//	driver.go   the driver-API function table and CUresult errors
//	device.go   Device: the locked thread, memory, streams, events
//	launch.go   modules, kernel argument packing, cuLaunchKernel
//	graph.go    stream capture into CUDA graphs and replay
//	nvrtc.go    run-time compilation; cache.go its on-disk cache
//	kernels.go  the registered kernels (RegisterKernels; this package's are
//	            kernels/*.cu, declared in kernels/kernels.decl, launched
//	            through the stubs go generate writes to kernels_gen.go);
//	            ops.go and the other files wrap them
//	blaslt.go   cuBLASLt GEMMs (blaslt_tune.go: optional autotuning);
//	            blas.go cuBLAS strided-batched GEMM
//	alloc.go    the caching device-memory allocator
package cuda
