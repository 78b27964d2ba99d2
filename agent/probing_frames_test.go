package agent

import "testing"

// TestProbingFrameKinds: Probing's own frames are known by crate in every
// spelling a symbol comes in, and nothing else is taken for them.
func TestProbingFrameKinds(t *testing.T) {
	for sym, want := range map[string][2]bool{ // handler, own
		"_RNvNtNtCs1bCYP5ecCFw_14probing_python8features12stack_tracer24backtrace_signal_handler":              {true, true},
		"_RINvNtCsgwUMlHOZE4Y_9backtrace9backtrace5traceNCNvMNtNtCs1bCYP5ecCFw_14probing_python8features12sta": {true, true},
		"_RNvCscmqRhJArDPt_20signal_hook_registry7handler":                                                     {true, false},
		"_ZN14probing_server6server17extension_handler17h0123456789abcdefE":                                    {true, true},
		"probing_python::features::vm_tracer::rust_eval_frame":                                                 {true, true},
		"<probing_core::Engine as core::ops::Drop>::drop":                                                      {true, true},
		"__restore_rt": {true, false},
		"_RNvMNtNtNtNtCs3kMxSuF3b04_5tokio7runtime9scheduler12multi_thread4parkNtB2_6Parker4park": {false, false},
		"_RNvNtNtNtNtCsGoUHcOWOjE_3std3sys3pal4unix5futex10futex_wait":                            {false, false},
		"__GI___clock_nanosleep": {false, false},
		"my_probing_helper":      {false, false},
		"_R9999999999999999999":  {false, false},
		"":                       {false, false},
	} {
		if got := [2]bool{probingHandlerFrame(sym), probingOwnFrame(sym)}; got != want {
			t.Errorf("%s: handler, own = %v, want %v", sym, got, want)
		}
	}
}
