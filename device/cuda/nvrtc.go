package cuda

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// nvrtcAPI is the subset of libnvrtc.so.13 gosling calls.
type nvrtcAPI struct {
	nvrtcVersion              func(major, minor *int32) int32
	nvrtcGetErrorString       func(r int32) string
	nvrtcGetNumSupportedArchs func(n *int32) int32
	nvrtcGetSupportedArchs    func(archs *int32) int32
	nvrtcCreateProgram        func(prog *uintptr, src string, name string, numHeaders int32, headers, includeNames unsafe.Pointer) int32
	nvrtcDestroyProgram       func(prog *uintptr) int32
	nvrtcCompileProgram       func(prog uintptr, numOptions int32, options unsafe.Pointer) int32
	nvrtcGetProgramLogSize    func(prog uintptr, n *uint64) int32
	nvrtcGetProgramLog        func(prog uintptr, log *byte) int32
	nvrtcGetCUBINSize         func(prog uintptr, n *uint64) int32
	nvrtcGetCUBIN             func(prog uintptr, out *byte) int32
	nvrtcGetPTXSize           func(prog uintptr, n *uint64) int32
	nvrtcGetPTX               func(prog uintptr, out *byte) int32
}

func (n *nvrtcAPI) symbols() []symbol {
	return []symbol{
		{&n.nvrtcVersion, []string{"nvrtcVersion"}},
		{&n.nvrtcGetErrorString, []string{"nvrtcGetErrorString"}},
		{&n.nvrtcGetNumSupportedArchs, []string{"nvrtcGetNumSupportedArchs"}},
		{&n.nvrtcGetSupportedArchs, []string{"nvrtcGetSupportedArchs"}},
		{&n.nvrtcCreateProgram, []string{"nvrtcCreateProgram"}},
		{&n.nvrtcDestroyProgram, []string{"nvrtcDestroyProgram"}},
		{&n.nvrtcCompileProgram, []string{"nvrtcCompileProgram"}},
		{&n.nvrtcGetProgramLogSize, []string{"nvrtcGetProgramLogSize"}},
		{&n.nvrtcGetProgramLog, []string{"nvrtcGetProgramLog"}},
		{&n.nvrtcGetCUBINSize, []string{"nvrtcGetCUBINSize"}},
		{&n.nvrtcGetCUBIN, []string{"nvrtcGetCUBIN"}},
		{&n.nvrtcGetPTXSize, []string{"nvrtcGetPTXSize"}},
		{&n.nvrtcGetPTX, []string{"nvrtcGetPTX"}},
	}
}

// NVRTC is the run-time CUDA C++ compiler. It needs no GPU and no context;
// its methods are safe for concurrent use (each compile is its own program).
type NVRTC struct {
	api          *nvrtcAPI
	Major, Minor int
	Path         string
	archs        []int // supported sm_XX, ascending
}

var (
	nvrtcOnce sync.Once
	nvrtcLib  *NVRTC
	nvrtcErr  error
)

// LoadNVRTC opens libnvrtc.so.13 (once per process).
func LoadNVRTC() (*NVRTC, error) {
	nvrtcOnce.Do(func() {
		h, path, err := openLibrary(LibNVRTC, processSearchEnv(), dlopen)
		if err != nil {
			nvrtcErr = err
			return
		}
		api := &nvrtcAPI{}
		for _, s := range api.symbols() {
			if err := bindFirst(h, s.field, s.names); err != nil {
				nvrtcErr = fmt.Errorf("%s at %s: %w", LibNVRTC, path, err)
				return
			}
		}
		n := &NVRTC{api: api, Path: path}
		var major, minor, count int32
		api.nvrtcVersion(&major, &minor)
		n.Major, n.Minor = int(major), int(minor)
		if api.nvrtcGetNumSupportedArchs(&count) == 0 && count > 0 {
			archs := make([]int32, count)
			api.nvrtcGetSupportedArchs(&archs[0])
			for _, a := range archs {
				n.archs = append(n.archs, int(a))
			}
			slices.Sort(n.archs)
		}
		nvrtcLib = n
	})
	return nvrtcLib, nvrtcErr
}

// Version is "major.minor", part of the kernel cache key.
func (n *NVRTC) Version() string { return fmt.Sprintf("%d.%d", n.Major, n.Minor) }

// SupportedArchs lists the sm_XX numbers this NVRTC can generate code for.
func (n *NVRTC) SupportedArchs() []int { return slices.Clone(n.archs) }

// Target is what to compile for a device: real machine code (CUBIN) for its
// exact architecture when this NVRTC knows it, else PTX for the newest
// architecture it knows, which the driver compiles for the device on load
// (a GPU newer than the NVRTC).
//
// Specific is the architecture-specific feature set ("sm_90a"): the
// wgmma and setmaxnreg instructions, whose code runs on that exact
// architecture only. Kernels test __CUDA_ARCH_FEAT_SM90_ALL to use them.
type Target struct {
	Arch     int  // 90 for sm_90 / compute_90
	CUBIN    bool // false: PTX
	Specific bool // "a" targets: sm_90a
}

// Option is the --gpu-architecture flag for t.
func (t Target) Option() string {
	suffix := ""
	if t.Specific {
		suffix = "a"
	}
	if t.CUBIN {
		return fmt.Sprintf("--gpu-architecture=sm_%d%s", t.Arch, suffix)
	}
	return fmt.Sprintf("--gpu-architecture=compute_%d%s", t.Arch, suffix)
}

// chooseTarget picks the compile target for deviceArch given the supported
// architectures (ascending). An empty list means unknown: trust the device.
func chooseTarget(deviceArch int, supported []int) (Target, error) {
	if len(supported) == 0 || slices.Contains(supported, deviceArch) {
		// Machine code for the exact GPU may as well use its specific
		// features; only Hopper's are used today.
		return Target{Arch: deviceArch, CUBIN: true, Specific: deviceArch == 90}, nil
	}
	newest := supported[len(supported)-1]
	if deviceArch > newest {
		return Target{Arch: newest, CUBIN: false}, nil
	}
	return Target{}, fmt.Errorf("NVRTC supports sm_%d to sm_%d; this GPU is sm_%d, too old for CUDA 13", supported[0], newest, deviceArch)
}

// TargetFor picks the compile target for a device architecture.
func (n *NVRTC) TargetFor(deviceArch int) (Target, error) { return chooseTarget(deviceArch, n.archs) }

// CompileError is a failed compilation with NVRTC's log.
type CompileError struct {
	Name, Log string
	Status    string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("nvrtc: compile %s: %s\n%s", e.Name, e.Status, strings.TrimSpace(e.Log))
}

// cStrings makes a char** for options; the returned slices must stay alive
// for the call.
func cStrings(ss []string) ([]*byte, [][]byte) {
	ptrs := make([]*byte, len(ss))
	bufs := make([][]byte, len(ss))
	for i, s := range ss {
		bufs[i] = append([]byte(s), 0)
		ptrs[i] = &bufs[i][0]
	}
	return ptrs, bufs
}

// Compile compiles CUDA C++ source for t with extra options and returns the
// image for cuModuleLoadData (CUBIN, or NUL-terminated PTX) and the log.
// The source may #include "h.Name" for each of headers.
func (n *NVRTC) Compile(name string, src []byte, headers []Header, t Target, options []string) (image []byte, log string, err error) {
	api := n.api
	var prog uintptr
	texts, names := make([]string, len(headers)), make([]string, len(headers))
	for i, h := range headers {
		texts[i], names[i] = string(h.Source), h.Name
	}
	textPtrs, textBufs := cStrings(texts)
	namePtrs, nameBufs := cStrings(names)
	var textArg, nameArg unsafe.Pointer
	if len(headers) > 0 {
		textArg, nameArg = unsafe.Pointer(&textPtrs[0]), unsafe.Pointer(&namePtrs[0])
	}
	r := api.nvrtcCreateProgram(&prog, string(src)+"\x00", name+"\x00", int32(len(headers)), textArg, nameArg)
	if r != 0 {
		return nil, "", fmt.Errorf("nvrtcCreateProgram %s: %s", name, api.nvrtcGetErrorString(r))
	}
	defer api.nvrtcDestroyProgram(&prog)

	opts := append([]string{t.Option()}, options...)
	ptrs, bufs := cStrings(opts)
	r = api.nvrtcCompileProgram(prog, int32(len(ptrs)), unsafe.Pointer(&ptrs[0]))
	runtime.KeepAlive(bufs)
	runtime.KeepAlive(ptrs)
	// The headers' strings stay alive until the program is compiled.
	runtime.KeepAlive(textBufs)
	runtime.KeepAlive(nameBufs)
	runtime.KeepAlive(textPtrs)
	runtime.KeepAlive(namePtrs)

	var logSize uint64
	if api.nvrtcGetProgramLogSize(prog, &logSize) == 0 && logSize > 1 {
		buf := make([]byte, logSize)
		api.nvrtcGetProgramLog(prog, &buf[0])
		log = strings.TrimRight(string(buf), "\x00")
	}
	if r != 0 {
		return nil, log, &CompileError{Name: name, Log: log, Status: api.nvrtcGetErrorString(r)}
	}

	getSize, get := api.nvrtcGetCUBINSize, api.nvrtcGetCUBIN
	if !t.CUBIN {
		getSize, get = api.nvrtcGetPTXSize, api.nvrtcGetPTX
	}
	var size uint64
	if r := getSize(prog, &size); r != 0 {
		return nil, log, fmt.Errorf("nvrtc: %s size: %s", name, api.nvrtcGetErrorString(r))
	}
	image = make([]byte, size)
	if r := get(prog, &image[0]); r != 0 {
		return nil, log, fmt.Errorf("nvrtc: %s code: %s", name, api.nvrtcGetErrorString(r))
	}
	return image, log, nil
}
