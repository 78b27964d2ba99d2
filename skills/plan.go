package skills

// PlanOptions tune Plan.
type PlanOptions struct {
	// PeerCount stands in for peer discovery when use_global defaults to
	// true and is not given: 0 (the default) resolves it to false.
	PeerCount int
	// UI: ui steps are shown without a skip_reason (they would run).
	UI bool
	// GOOS overrides runtime.GOOS for platform checks (tests).
	GOOS string
}

// PlanStep is one step of the plan JSON: templates expanded. sql, tool,
// args, path, view and action appear for the step types that use them;
// skip_reason says why a run would skip the step (an extension).
type PlanStep struct {
	ID         string            `json:"id"`
	Title      string            `json:"title"`
	Type       StepType          `json:"type"`
	OnEmpty    string            `json:"on_empty"`
	SQL        string            `json:"sql,omitempty"`
	Tool       string            `json:"tool,omitempty"`
	Args       map[string]string `json:"args,omitempty"`
	Path       string            `json:"path,omitempty"`
	View       string            `json:"view,omitempty"`
	Action     string            `json:"action,omitempty"`
	When       string            `json:"when,omitempty"`
	Platform   string            `json:"platform,omitempty"`
	Cluster    bool              `json:"cluster,omitempty"` // the step would fan out
	SkipReason string            `json:"skip_reason,omitempty"`
}

// PlanResult is plan_skill's JSON (§5.2, §6.7).
type PlanResult struct {
	SkillID    string            `json:"skill_id"`
	Title      string            `json:"title"`
	Parameters map[string]string `json:"parameters"` // defaults merged with overrides
	Steps      []PlanStep        `json:"steps"`
	NextSteps  []string          `json:"next_steps"`
}

// Plan binds the overrides and expands every step without running any.
// Its errors are Bind's (unknown or malformed parameters) and Expand's.
func Plan(s *Skill, overrides map[string]string, opt PlanOptions) (*PlanResult, error) {
	bind, err := s.Bind(overrides, BindOptions{GOOS: opt.GOOS, PeerCount: func() (int, error) { return opt.PeerCount, nil }})
	if err != nil {
		return nil, err
	}
	p := &PlanResult{SkillID: s.ID, Title: skillTitle(s), Parameters: map[string]string{}, Steps: []PlanStep{}, NextSteps: []string{}}
	for _, prm := range s.Steps.Spec.Parameters {
		if v, ok := bind.Values[prm.Name]; ok {
			p.Parameters[prm.Name] = v
		}
	}
	for i := range s.Steps.Spec.Steps {
		st := &s.Steps.Spec.Steps[i]
		e, err := bind.Expand(st)
		if err != nil {
			return nil, err
		}
		ps := PlanStep{ID: e.ID, Title: e.Title, Type: e.Type, OnEmpty: e.OnEmpty, SQL: e.SQL, Tool: e.Tool, Args: e.Args,
			Path: e.Path, Action: e.Action, When: st.When, Platform: st.Platform, SkipReason: e.SkipReason}
		if e.Type == StepSQL {
			ps.Cluster = e.Fanout
		}
		if e.Type == StepUI {
			ps.View = e.View
			if opt.UI && e.SkipReason == uiSkipReason(e.View) {
				ps.SkipReason = ""
			}
		}
		p.Steps = append(p.Steps, ps)
	}
	p.NextSteps = append(p.NextSteps, s.Steps.Spec.NextSteps...)
	return p, nil
}
