package tensor

import (
	"fmt"
	"strings"
	"testing"
)

// TestHostDeviceViews: T.Host succeeds only for host storage and T.Device
// only for device storage; each view reads the same Len and Width as the
// T, and T() gives the storage back.
func TestHostDeviceViews(t *testing.T) {
	host := From([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	dev := Device{Shape: []int{2, 3}, Ptr: 0x1000, DType: BF16}.T()

	h, err := host.Host()
	if err != nil || h.Len() != 6 || h.Width() != 3 || h.Row(1)[0] != 4 {
		t.Errorf("host view: %+v, %v", h, err)
	}
	if back := h.T(); back.OnDevice() || &back.HostData()[0] != &host.HostData()[0] || back.Len() != host.Len() {
		t.Errorf("host view back: %+v", back)
	}
	if _, err := host.Device(); err == nil || !strings.Contains(err.Error(), "in host memory") {
		t.Errorf("device view of a host tensor: %v", err)
	}

	d, err := dev.Device()
	if err != nil || d.Len() != dev.Len() || d.Width() != 3 || d.Ptr != 0x1000 || d.DType != BF16 {
		t.Errorf("device view: %+v, %v", d, err)
	}
	if back := d.T(); back.DevPtr() != dev.DevPtr() || back.DType != BF16 || !back.OnDevice() {
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

// TestStorageAccessors: HostData and DevPtr give the storage they name
// and panic on the other (a kernel handed the wrong tensor), the zero T
// gives neither storage without a panic, and Reshape keeps the storage
// under a shape of as many values.
func TestStorageAccessors(t *testing.T) {
	host := From([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	dev := Device{Shape: []int{2, 3}, Ptr: 0x1000, DType: BF16}.T()
	panics := func(name string, fn func(), want string) {
		t.Helper()
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), want) {
				t.Errorf("%s: recovered %v, want a panic naming %q", name, r, want)
			}
		}()
		fn()
	}
	if d := host.HostData(); len(d) != 6 || d[4] != 5 {
		t.Errorf("HostData: %v", d)
	}
	if p := dev.DevPtr(); p != 0x1000 {
		t.Errorf("DevPtr: %#x", p)
	}
	panics("HostData of a device tensor", func() { dev.HostData() }, "[2 3] in device memory")
	panics("DevPtr of a host tensor", func() { host.DevPtr() }, "[2 3] in host memory")
	if (T{}).HostData() != nil || (T{}).DevPtr() != 0 {
		t.Error("the zero T holds storage")
	}
	r := host.Reshape(3, 2)
	if r.Rows() != 3 || &r.HostData()[0] != &host.HostData()[0] || host.Cols() != 3 {
		t.Errorf("Reshape(3, 2) of a host tensor: %v rows, shares storage %v, original %v", r.Rows(), &r.HostData()[0] == &host.HostData()[0], host.Shape)
	}
	if r := dev.Reshape(6, 1); r.DevPtr() != 0x1000 || r.DType != BF16 || r.Rows() != 6 {
		t.Errorf("Reshape(6, 1) of a device tensor: %+v", r)
	}
	panics("Reshape to fewer values", func() { host.Reshape(5) }, "reshape of [2 3] to [5]")
}
