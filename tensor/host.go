package tensor

import "fmt"

// T is the handle device.Ops and attention.Backend pass around, whatever
// device they run on, so it holds either storage. Host and Device are its
// two checked views: code that reads values takes one of them, never T,
// and gets it from T.Host or T.Device, which fail on the other storage.
// A host kernel then cannot be handed a device tensor by accident (the
// compiler refuses a T where a Host is wanted), and a shape check written
// over Len and Width (attention.Shaped) serves all three.

// Host is an activation in host memory: float32 values, row-major.
type Host struct {
	Shape []int
	Data  []float32
}

// Device is an activation in device memory: Ptr is the address of its
// values, stored as DType; the device package that allocated it owns the
// memory.
type Device struct {
	Shape []int
	Ptr   uintptr
	DType DType
}

// Host is t's host view; it fails when t's values are in device memory.
// The zero T is an empty Host.
func (t T) Host() (Host, error) {
	if t.dev != 0 {
		return Host{}, fmt.Errorf("tensor %v is in device memory, where host code cannot read it", t.Shape)
	}
	return Host{Shape: t.Shape, Data: t.data}, nil
}

// Device is t's device view; it fails when t's values are in host memory.
// The zero T is an empty Device.
func (t T) Device() (Device, error) {
	if t.data != nil {
		return Device{}, fmt.Errorf("tensor %v is in host memory, where a device kernel cannot read it", t.Shape)
	}
	return Device{Shape: t.Shape, Ptr: t.dev, DType: t.DType}, nil
}

// NewHost allocates a zeroed host tensor of the given shape.
func NewHost(shape ...int) Host {
	t := New(shape...)
	return Host{Shape: t.Shape, Data: t.data}
}

// T is h as the handle device.Ops and backends return.
func (h Host) T() T { return T{Shape: h.Shape, data: h.Data, DType: F32} }

// T is d as the handle device.Ops and backends return.
func (d Device) T() T { return T{Shape: d.Shape, dev: d.Ptr, DType: d.DType} }

// Len is how many values h holds.
func (h Host) Len() int { return len(h.Data) }

// Width is the last dimension, 0 for a tensor without a shape.
func (h Host) Width() int { return width(h.Shape) }

// Cols is the last dimension.
func (h Host) Cols() int { return h.Shape[len(h.Shape)-1] }

// Rows is how many rows of Cols values h holds (0 without a shape).
func (h Host) Rows() int {
	if w := h.Width(); w > 0 {
		return len(h.Data) / w
	}
	return 0
}

// Row returns row i, a view over the last dimension.
func (h Host) Row(i int) []float32 {
	c := h.Cols()
	return h.Data[i*c : (i+1)*c]
}

// Len is how many values d holds: the shape's product, 0 for the zero
// Device.
func (d Device) Len() int {
	if len(d.Shape) == 0 {
		return 0
	}
	n := 1
	for _, s := range d.Shape {
		n *= s
	}
	return n
}

// Width is the last dimension, 0 for a tensor without a shape.
func (d Device) Width() int { return width(d.Shape) }

// Cols is the last dimension.
func (d Device) Cols() int { return d.Shape[len(d.Shape)-1] }

func width(shape []int) int {
	if len(shape) == 0 {
		return 0
	}
	return shape[len(shape)-1]
}
