package peertest

import (
	"net"
	"testing"
)

// A port that another server took before Mailpit could bind it is not
// taken for Mailpit's: its greeting gives it away, and StartMailpit then
// starts again on other ports.
func TestAnswersRefusesAnotherServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("220 elsewhere ESMTP ready\r\n"))
			c.Close()
		}
	}()
	m := &Mailpit{SMTPAddr: l.Addr().String(), APIURL: "http://" + l.Addr().String()}
	if err := m.answers(); err == nil {
		t.Fatal("another server's greeting passed for Mailpit's")
	}
	mp := StartMailpit(t, MailpitOptions{})
	if err := mp.answers(); err != nil {
		t.Fatalf("a started Mailpit: %v", err)
	}
}
