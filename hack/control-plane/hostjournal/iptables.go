package main

import (
	"fmt"
	"strings"
)

// iptablesCmd is the command of an address family.
func iptablesCmd(family string) string {
	if family == "ip6" {
		return "ip6tables"
	}
	return "iptables"
}

// Listing is an iptables table as `iptables -t T -S` prints it.
type Listing struct {
	Chains []string   // every chain, built-in (-P) and user (-N), in order
	User   []string   // user chains (-N)
	Rules  [][]string // rules as argument vectors, starting "-A", CHAIN
}

// parseListing reads `iptables -S`. Anything it does not understand is an
// error: a table whose listing cannot be read is left alone, never acted on
// with a guess.
func parseListing(out string) (Listing, error) {
	var l Listing
	for n, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		args, err := splitArgs(line)
		if err != nil {
			return Listing{}, fmt.Errorf("line %d %q: %v", n+1, line, err)
		}
		switch {
		case len(args) == 3 && args[0] == "-P":
			l.Chains = append(l.Chains, args[1])
		case len(args) == 2 && args[0] == "-N":
			l.Chains = append(l.Chains, args[1])
			l.User = append(l.User, args[1])
		case len(args) >= 2 && args[0] == "-A":
			l.Rules = append(l.Rules, args)
		default:
			return Listing{}, fmt.Errorf("line %d %q: not -P, -N or -A", n+1, line)
		}
	}
	return l, nil
}

// splitArgs splits one line of `iptables -S` into arguments: words separated
// by spaces, and double-quoted strings in which a backslash escapes the next
// character (how iptables prints a comment).
func splitArgs(line string) ([]string, error) {
	var args []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quoted && c == '\\':
			if i+1 >= len(line) {
				return nil, fmt.Errorf("a backslash ends the line")
			}
			i++
			cur.WriteByte(line[i])
		case quoted && c == '"':
			quoted = false
		case quoted:
			cur.WriteByte(c)
		case c == '"':
			quoted, inWord = true, true
		case c == ' ' || c == '\t':
			if inWord {
				args = append(args, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		args = append(args, cur.String())
	}
	return args, nil
}

// quoteArg prints an argument as iptables -S does.
func quoteArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\"\\'") {
		return a
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(a) + `"`
}

// jumpTarget is the chain a rule jumps or goes to, if any.
func jumpTarget(rule []string) string {
	for i := 0; i+1 < len(rule); i++ {
		if rule[i] == "-j" || rule[i] == "-g" || rule[i] == "--jump" || rule[i] == "--goto" {
			return rule[i+1]
		}
	}
	return ""
}
