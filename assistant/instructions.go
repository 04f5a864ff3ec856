package assistant

import (
	"context"
	"strings"
)

// instructionsIntro opens a person's custom instructions in the system
// prompt, so that the model tells them from the deployment's own.
const instructionsIntro = "\n\nThe person you are helping gave these instructions about how to answer them:\n"

// systemPrompt is the system prompt of the turn's model requests: the
// deployment's, with the run owner's custom instructions (Settings)
// appended. It is read once per slice and kept, so that every request of
// a slice sends the same prompt.
func (t *turn) systemPrompt(ctx context.Context) (string, error) {
	if t.system != nil {
		return *t.system, nil
	}
	p := t.rt.o.SystemPrompt
	// A turn built for no one's run (a request assembled on its own)
	// carries no one's instructions.
	if t.run.Owner != "" {
		s, err := t.rt.st.GetSettings(ctx, t.run.Owner)
		if err != nil {
			return "", err
		}
		p = withInstructions(p, s.Instructions)
	}
	t.system = &p
	return p, nil
}

// withInstructions appends instructions, when there are any, to prompt.
func withInstructions(prompt, instructions string) string {
	if strings.TrimSpace(instructions) == "" {
		return prompt
	}
	return prompt + instructionsIntro + instructions
}
