package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Module is a loaded CUBIN or PTX image.
type Module struct {
	h   uintptr
	dev *Device
}

// Function is a kernel in a loaded module.
type Function struct {
	h    uintptr
	Name string
}

// LoadModule loads a CUBIN (or NUL-terminated PTX) image into the device's context.
func (dev *Device) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cuModuleLoadData: empty image")
	}
	m := &Module{dev: dev}
	err := dev.Do(func() error {
		return check("cuModuleLoadData", dev.d.cuModuleLoadData(&m.h, unsafe.Pointer(&image[0])))
	})
	runtime.KeepAlive(image)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Function looks up an extern "C" kernel by name.
func (m *Module) Function(name string) (Function, error) {
	f := Function{Name: name}
	err := m.dev.Do(func() error {
		return check("cuModuleGetFunction "+name, m.dev.d.cuModuleGetFunction(&f.h, m.h, name))
	})
	return f, err
}

// Unload releases the module; its Functions become invalid.
func (m *Module) Unload() error {
	return m.dev.Do(func() error { return check("cuModuleUnload", m.dev.d.cuModuleUnload(m.h)) })
}

// SetMaxDynamicShared lets f use more than the default 48 KiB of dynamic
// shared memory per block.
func (dev *Device) SetMaxDynamicShared(f Function, bytes int) error {
	return dev.Do(func() error {
		return check("cuFuncSetAttribute", dev.d.cuFuncSetAttribute(f.h, funcAttrMaxDynamicSharedMem, int32(bytes)))
	})
}

// Resources are a compiled kernel's registers per thread and local
// memory (stack, spills) per thread in bytes.
type Resources struct{ Regs, LocalBytes int }

// FuncResources reads f's resources from the driver.
func (dev *Device) FuncResources(f Function) (Resources, error) {
	var regs, local int32
	err := dev.Do(func() error {
		return errors.Join(check("cuFuncGetAttribute", dev.d.cuFuncGetAttribute(&regs, funcAttrNumRegs, f.h)),
			check("cuFuncGetAttribute", dev.d.cuFuncGetAttribute(&local, funcAttrLocalSizeBytes, f.h)))
	})
	return Resources{Regs: int(regs), LocalBytes: int(local)}, err
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z int }

// D1 is a one-dimensional shape.
func D1(x int) Dim3 { return Dim3{x, 1, 1} }

// LaunchConfig is one kernel launch's shape.
type LaunchConfig struct {
	Grid, Block Dim3
	SharedMem   int // dynamic shared memory, bytes
}

// Hardware launch limits common to every architecture gosling targets (sm_70+).
const (
	maxThreadsPerBlock = 1024
	maxGridX           = math.MaxInt32
	maxGridYZ          = 65535
	maxBlockZ          = 64
)

// validate rejects shapes the driver would refuse with a less helpful error.
func (c LaunchConfig) validate() error {
	g, b := c.Grid, c.Block
	switch {
	case g.X < 1 || g.Y < 1 || g.Z < 1 || b.X < 1 || b.Y < 1 || b.Z < 1:
		return fmt.Errorf("grid %v and block %v must be positive", g, b)
	case g.X > maxGridX || g.Y > maxGridYZ || g.Z > maxGridYZ:
		return fmt.Errorf("grid %v over the limit (%d, %d, %d)", g, maxGridX, maxGridYZ, maxGridYZ)
	case b.X*b.Y*b.Z > maxThreadsPerBlock || b.Z > maxBlockZ:
		return fmt.Errorf("block %v over %d threads", b, maxThreadsPerBlock)
	case c.SharedMem < 0:
		return fmt.Errorf("negative shared memory %d", c.SharedMem)
	}
	return nil
}

// maxKernelArgs bounds the arguments of one launch; gosling's kernels take
// at most a dozen or two.
const maxKernelArgs = 40

// Args packs kernel arguments: each gets its own 8-byte slot; a 4-byte
// value sits at the start of its slot, which on a little-endian machine is
// exactly an int or float in memory. Launch hands cuLaunchKernel the array
// of slot addresses it wants (kernelParams[i] points at argument i), built
// on the device thread, so an Args is only the values (a launch-heavy
// decode step makes hundreds of them).
//
// The slot addresses aim into the Args value, so it must stay alive and
// unmoved for the call: Launch keeps it alive, and Go's heap does not move
// objects.
//
// A tensor map (TensorMap) is 128 bytes: it lives in maps, 64-byte
// aligned as in C, its argument's slot holding its index there and its bit
// set in mapArgs.
type Args struct {
	slots   [maxKernelArgs]uint64
	n       int
	err     error
	maps    []uint64
	mapArgs uint64
}

func (a *Args) push(bits uint64) *Args {
	if a.n == maxKernelArgs {
		a.err = fmt.Errorf("more than %d kernel arguments", maxKernelArgs)
		return a
	}
	a.slots[a.n] = bits
	a.n++
	return a
}

// Ptr appends a device pointer (any T* parameter).
func (a *Args) Ptr(p DevicePtr) *Args { return a.push(uint64(p)) }

// Int32 appends an int.
func (a *Args) Int32(v int) *Args {
	if v < math.MinInt32 || v > math.MaxInt32 {
		a.err = fmt.Errorf("kernel argument %d: %d overflows int", a.n, v)
	}
	return a.push(uint64(uint32(int32(v))))
}

// Int64 appends a long long (element strides and counts past 2³¹).
func (a *Args) Int64(v int64) *Args { return a.push(uint64(v)) }

// Float32 appends a float.
func (a *Args) Float32(v float32) *Args { return a.push(uint64(math.Float32bits(v))) }

// TensorMap appends a tensor map passed by value (a `const
// __grid_constant__ CUtensorMap` parameter); m is copied.
func (a *Args) TensorMap(m *TensorMap) *Args {
	k := len(a.maps) / tensorMapWords
	if a.n < maxKernelArgs {
		grown := alignedWords((k + 1) * tensorMapWords)
		copy(grown, a.maps)
		copy(grown[k*tensorMapWords:], m.W[:])
		a.maps = grown
		a.mapArgs |= 1 << a.n
	}
	return a.push(uint64(k))
}

// Len is the number of arguments packed.
func (a *Args) Len() int { return a.n }

// Err is the first packing error.
func (a *Args) Err() error { return a.err }

// kernelParams fills params with the addresses of a's slots and returns
// the void** argument of cuLaunchKernel (nil with no arguments).
func (a *Args) kernelParams(params *[maxKernelArgs]unsafe.Pointer) unsafe.Pointer {
	if a == nil || a.n == 0 {
		return nil
	}
	for i := range a.n {
		if a.mapArgs&(1<<i) != 0 {
			params[i] = unsafe.Pointer(&a.maps[a.slots[i]*tensorMapWords])
			continue
		}
		params[i] = unsafe.Pointer(&a.slots[i])
	}
	return unsafe.Pointer(&params[0])
}

// Launch enqueues f on s. args may be nil for a kernel without parameters.
func (dev *Device) Launch(f Function, cfg LaunchConfig, s Stream, args *Args) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("launch %s: %w", f.Name, err)
	}
	if args != nil && args.err != nil {
		return fmt.Errorf("launch %s: %w", f.Name, args.err)
	}
	grid := [3]uint32{uint32(cfg.Grid.X), uint32(cfg.Grid.Y), uint32(cfg.Grid.Z)}
	block := [3]uint32{uint32(cfg.Block.X), uint32(cfg.Block.Y), uint32(cfg.Block.Z)}
	err := dev.Do(func() error {
		if dev.rec.mode != recordOff && dev.recordLaunch(f, grid, block, cfg.SharedMem, s, args) {
			return nil
		}
		ev := dev.profBegin(s)
		if r := dev.d.launchKernel(f.h, grid, block, uint32(cfg.SharedMem), s, args.kernelParams(&dev.params)); r != resultSuccess {
			return &CallError{Call: "cuLaunchKernel " + f.Name, Result: r}
		}
		dev.profEnd(s, ev, func() string { return f.Name })
		return nil
	})
	runtime.KeepAlive(args)
	return err
}

// recordLaunch folds a launch into the recording (record.go); true in a
// dry run, where it is not enqueued.
func (dev *Device) recordLaunch(f Function, grid, block [3]uint32, smem int, s Stream, args *Args) bool {
	var w [5 + maxKernelArgs]uint64
	w[0], w[1] = uint64(f.h), uint64(grid[0])|uint64(grid[1])<<32
	w[2], w[3] = uint64(grid[2])|uint64(block[0])<<32, uint64(block[1])|uint64(block[2])<<32
	w[4] = uint64(smem) | uint64(s)<<24
	n := 5
	if args != nil {
		n += copy(w[5:], args.slots[:args.n])
		if len(args.maps) > 0 { // a tensor map's slot is only its index
			return dev.rec.record(opLaunch, append(w[:n:n], args.maps...)...)
		}
	}
	return dev.rec.record(opLaunch, w[:n]...)
}
