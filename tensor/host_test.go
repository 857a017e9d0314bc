package tensor

import (
	"strings"
	"testing"
)

// TestHostDeviceViews: T.Host succeeds only for host storage and T.Device
// only for device storage; each view reads the same Len and Width as the
// T, and T() gives the storage back.
func TestHostDeviceViews(t *testing.T) {
	host := From([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	dev := T{Shape: []int{2, 3}, Dev: 0x1000, DType: BF16}

	h, err := host.Host()
	if err != nil || h.Len() != 6 || h.Width() != 3 || h.Row(1)[0] != 4 {
		t.Errorf("host view: %+v, %v", h, err)
	}
	if back := h.T(); back.OnDevice() || &back.Data[0] != &host.Data[0] || back.Len() != host.Len() {
		t.Errorf("host view back: %+v", back)
	}
	if _, err := host.Device(); err == nil || !strings.Contains(err.Error(), "in host memory") {
		t.Errorf("device view of a host tensor: %v", err)
	}

	d, err := dev.Device()
	if err != nil || d.Len() != dev.Len() || d.Width() != 3 || d.Ptr != 0x1000 || d.DType != BF16 {
		t.Errorf("device view: %+v, %v", d, err)
	}
	if back := d.T(); back.Dev != dev.Dev || back.DType != BF16 || back.Data != nil {
		t.Errorf("device view back: %+v", back)
	}
	if _, err := dev.Host(); err == nil || !strings.Contains(err.Error(), "in device memory") {
		t.Errorf("host view of a device tensor: %v", err)
	}

	// The zero T (an MLA layer's absent v) is empty either way.
	if h, err := (T{}).Host(); err != nil || h.Len() != 0 || h.Width() != 0 {
		t.Errorf("zero T as Host: %+v, %v", h, err)
	}
	if d, err := (T{}).Device(); err != nil || d.Len() != 0 || d.Width() != 0 {
		t.Errorf("zero T as Device: %+v, %v", d, err)
	}
}
