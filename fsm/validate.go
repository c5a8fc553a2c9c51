package fsm

import "fmt"

// ValidateCommand checks a command that arrives from outside the log (an
// admin request, possibly forwarded by another node) before it is proposed.
// Only policy and key-reset commands may be proposed that way, and they must
// decode completely and carry valid limits: nothing a client sends may reach
// the log in a form that would stop the state machine.
func ValidateCommand(b []byte) error {
	var c command
	if err := decodeCommand(&c, b); err != nil {
		return err
	}
	if v := commands[c.typ].validate; v != nil {
		return v(&c)
	}
	return fmt.Errorf("%w: type %d may not be proposed by a client", ErrBadCommand, c.typ)
}
