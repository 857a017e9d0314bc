package cuda

import "testing"

// TestGPUSample runs the device-sampling suites (sample_test.go) on the GPU;
// it skips without a driver.
func TestGPUSample(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	runSampleSuites(t, opsEnv{dev: dev, k: k, lt: lt})
}

// TestGPUSpecVerify runs the speculative-verification suites
// (spec_verify_test.go) on the GPU; it skips without a driver.
func TestGPUSpecVerify(t *testing.T) {
	dev, k := needKernels(t)
	_, lt := needLt(t)
	runSpecVerifySuites(t, opsEnv{dev: dev, k: k, lt: lt})
}
