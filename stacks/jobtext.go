package stacks

import (
	"strconv"

	"github.com/probing-mcp/probing-mcp/internal/jobtext"
)

// A process's stacks are the job's text (file, function and thread
// names): the merge keeps them clipped (issue 23: 20 KB names made one
// get_stacks answer 722,000 characters), and every text quotes them
// (jobtext).

// boundFrames returns frames whose strings are clipped job text.
func boundFrames(fr []Frame) []Frame {
	for i := range fr {
		if fr[i].File == "" {
			continue // Merge's own "... N frames omitted ..." marker
		}
		fr[i].File = jobtext.ClipTail(fr[i].File, jobtext.Path)
		fr[i].Function = jobtext.Clip(fr[i].Function, jobtext.Func)
	}
	return fr
}

// Text is the frame for a text: "function (file:line)", the function and
// the file quoted (String is the same unquoted, for keys and logs).
func (f Frame) Text() string {
	return quoteFunc(f.Function) + " (" + jobtext.QuoteTail(f.File, jobtext.Path) + ":" + strconv.Itoa(f.Line) + ")"
}

// quoteFunc and quoteFile quote a frame's function and file's base name
// for a text.
func quoteFunc(f string) string { return jobtext.Quote(f, jobtext.Func) }
func quoteFile(f string) string { return jobtext.QuoteTail(f, jobtext.Name) }
