package frsynth

import "fmt"

// frame is one stack frame as a dump holds it.
type frame struct {
	name, file string
	line       int64
}

// stackOf is the stack recorded for the i-th op, innermost first: three
// Python frames by default; with CppStack, the native frames torch
// symbolizes (op-specific, then dispatcher, pybind11 and CPython ones)
// under Python frames that vary with the call site (one of 16 layers).
func stackOf(spec Spec, o op, i int) []frame {
	py := []frame{{o.name, "torch/distributed/distributed_c10d.py", 2950}, {"train_step", "train.py", 80 + int64(o.pg)}, {"main", "train.py", 120}}
	if !spec.CppStack {
		return py
	}
	const (
		pgNCCL = "/opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
		fr     = "/opt/pytorch/torch/csrc/distributed/c10d/FlightRecorder.cpp"
		ops    = "/opt/pytorch/torch/csrc/distributed/c10d/Ops.cpp"
		disp   = "/opt/pytorch/aten/src/ATen/core/dispatch/Dispatcher.h"
		boxed  = "/opt/pytorch/aten/src/ATen/core/boxing/impl/make_boxed_from_unboxed_functor.h"
		pyInit = "/opt/pytorch/torch/csrc/distributed/c10d/init.cpp"
		pyb    = "/opt/pytorch/third_party/pybind11/include/pybind11/pybind11.h"
		ceval  = "/usr/local/src/conda/python-3.11.9/Python/ceval.c"
		call   = "/usr/local/src/conda/python-3.11.9/Objects/call.c"
	)
	fn := map[string]string{"all_reduce": "allreduce", "_all_gather_base": "_allgather_base"}[o.name]
	if fn == "" {
		fn = o.name
	}
	opts := map[string]string{"allreduce": "AllreduceOptions", "_allgather_base": "AllgatherOptions"}[fn]
	if opts == "" {
		opts = "AllreduceOptions"
	}
	layer := int64(i/4) % 16
	st := []frame{
		{"torch::CapturedTraceback::gather(bool, bool, bool)", "/opt/pytorch/torch/csrc/profiler/combined_traceback.cpp", 42},
		{"c10d::FlightRecorder<at::cuda::CUDAEvent>::record(unsigned long, std::tuple<std::string, std::string> const&, unsigned long, unsigned long, unsigned long, char const*, c10::ArrayRef<at::Tensor>, c10::ArrayRef<at::Tensor>, at::cuda::CUDAEvent*, at::cuda::CUDAEvent*, std::chrono::duration<long, std::ratio<1l, 1000l> >, std::shared_ptr<c10d::ProcessGroupStatus>, bool)", fr, 98},
		{"c10d::ProcessGroupNCCL::initWork(c10::Device&, int, c10d::OpType, bool, char const*, std::vector<at::Tensor, std::allocator<at::Tensor> > const&, std::vector<at::Tensor, std::allocator<at::Tensor> > const&, bool)", pgNCCL, 2614},
		{fmt.Sprintf("c10::intrusive_ptr<c10d::Work, c10::detail::intrusive_target_default_null_type<c10d::Work> > c10d::ProcessGroupNCCL::collective<c10d::ProcessGroupNCCL::%s(std::vector<at::Tensor, std::allocator<at::Tensor> >&, c10d::%s const&)::{lambda(at::Tensor&, at::Tensor&, ncclComm*, c10::cuda::CUDAStream&)#1}>(at::Tensor&, at::Tensor&, c10d::OpType, char const*, bool, bool)", fn, opts), pgNCCL, 3521},
		{fmt.Sprintf("c10d::ProcessGroupNCCL::%s_impl(at::Tensor&, char const*, c10d::%s const&)", fn, opts), pgNCCL, 4012},
		{fmt.Sprintf("c10d::ProcessGroupNCCL::%s(std::vector<at::Tensor, std::allocator<at::Tensor> >&, c10d::%s const&)", fn, opts), pgNCCL, 4077},
		{fmt.Sprintf("c10d::ops::(anonymous namespace)::%s_CUDA(c10::ArrayRef<at::Tensor>, c10::intrusive_ptr<c10d::ProcessGroup, c10::detail::intrusive_target_default_null_type<c10d::ProcessGroup> > const&, c10::intrusive_ptr<c10d::ReduceOp, c10::detail::intrusive_target_default_null_type<c10d::ReduceOp> > const&, std::optional<at::Tensor> const&, long, bool)", fn), ops, 156},
		{fmt.Sprintf("c10::impl::make_boxed_from_unboxed_functor<c10::impl::detail::WrapFunctionIntoRuntimeFunctor_<std::tuple<std::vector<at::Tensor, std::allocator<at::Tensor> >, c10::intrusive_ptr<c10d::Work, c10::detail::intrusive_target_default_null_type<c10d::Work> > > (*)(c10::ArrayRef<at::Tensor>, ...), c10d::%s>, false>::call(c10::OperatorKernel*, c10::OperatorHandle const&, c10::DispatchKeySet, std::vector<c10::IValue, std::allocator<c10::IValue> >*)", opts), boxed, 579},
		{"c10::OperatorHandle::redispatchBoxed(c10::DispatchKeySet, std::vector<c10::IValue, std::allocator<c10::IValue> >*) const", disp, 802},
		{"torch::autograd::basicAutogradNotImplementedFallbackImpl(c10::OperatorHandle const&, c10::DispatchKeySet, std::vector<c10::IValue, std::allocator<c10::IValue> >*)", "/opt/pytorch/torch/csrc/autograd/autograd_not_implemented_fallback.cpp", 371},
		{"c10::Dispatcher::callBoxed(c10::OperatorHandle const&, std::vector<c10::IValue, std::allocator<c10::IValue> >*) const", disp, 778},
		{fmt.Sprintf("c10d::ProcessGroup::%s(std::vector<at::Tensor, std::allocator<at::Tensor> >&, c10d::%s const&)", fn, opts), "/opt/pytorch/torch/csrc/distributed/c10d/ProcessGroup.hpp", 246},
		{fmt.Sprintf("pybind11::cpp_function::initialize<c10d::%s(c10d::ProcessGroup::*)(...)>::{lambda(pybind11::detail::function_call&)#3}::_FUN(pybind11::detail::function_call&)", fn), pyInit, 2187},
		{"pybind11::cpp_function::dispatcher(_object*, _object*, _object*)", pyb, 1003},
		{"cfunction_call", "/usr/local/src/conda/python-3.11.9/Objects/methodobject.c", 542},
		{"_PyObject_MakeTpCall", call, 214},
		{"_PyEval_EvalFrameDefault", ceval, 5382 + layer},
	}
	st = append(st, py[0], frame{"wrapper", "torch/distributed/c10d_logger.py", 81},
		frame{"forward", "model.py", 100 + 7*layer}, frame{"_call_impl", "torch/nn/modules/module.py", 1750})
	return append(st, py[1:]...)
}
