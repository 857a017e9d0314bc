package engine

import (
	"fmt"

	"github.com/gosling-ai/gosling/device"
)

// StartKernelProfile makes every later forward run eagerly with each of
// its device operations timed (device.Profiler), until
// StopKernelProfile. Devices that cannot time their operations (the
// CPU) refuse.
func (e *Engine) StartKernelProfile() error {
	p, ok := e.rt.(device.Profiler)
	if !ok {
		return fmt.Errorf("the %s device cannot profile kernels", e.rt.Name())
	}
	return p.StartProfile()
}

// StopKernelProfile ends the session StartKernelProfile began.
func (e *Engine) StopKernelProfile() (device.Profile, error) {
	p, ok := e.rt.(device.Profiler)
	if !ok {
		return device.Profile{}, fmt.Errorf("the %s device cannot profile kernels", e.rt.Name())
	}
	return p.StopProfile()
}
