package apikey

// WrongSecret returns key with one character of its secret changed: a well-formed key
// with the same ID that must not authenticate. For tests.
func WrongSecret(key string) string {
	i := len(key) - 10 // inside the secret, away from its last character's padding bits
	c := byte('A')
	if key[i] == 'A' {
		c = 'B'
	}
	return key[:i] + string(c) + key[i+1:]
}
