/* The claim protocol of onceq's idempotency record (lua/*.lua), for
 * spin. One key, three deliveries of its job, each retrying until it sees the
 * job done, as asynq redelivers until a task is acknowledged. Each Lua script
 * is one atomic step. Time is abstract: a lease nobody holds (its holder
 * crashed, or the claim's reply was lost) ends eventually; a held lease ends
 * only as a fault (its holder paused past it). Faults (lost replies,
 * crashes, handler errors, pauses) are bounded, so a fault-free suffix exists.
 *
 * Checked (internal/linearize TestSpinModel):
 *  - safety: no two completions are accepted for the key (the assertion);
 *  - liveness: the job is eventually done, so no accepted job is left
 *    unclaimable (the ltl formula, under weak fairness).
 * Variants: -DREENTRANT lets a delivery re-take its own running claim;
 * -DSHARED gives deliveries 0 and 1 one delivery identity (one task run twice
 * at once in one process); -DNOFENCE completes with a plain write, no check,
 * and must break safety. */

#define N 3
#define MAXFAULTS 3

mtype = { absent, running, done, failed };

mtype st = absent;
byte tok = 0;        /* current fencing token; grows on every acquisition */
bool live = false;   /* the lease has not ended */
byte owner = 255;    /* delivery identity of the current claim */
byte mine[N];        /* token each delivery holds, 0: none */
byte completions = 0;
byte faults = 0;

#ifdef SHARED
#define identity(i) ((i) == 1 -> 0 : (i))
#else
#define identity(i) (i)
#endif
#define orphan (mine[0] != tok && mine[1] != tok && mine[2] != tok)

#ifdef REENTRANT
#define reenters(i) (owner == identity(i))
#else
#define reenters(i) false
#endif

#ifdef NOFENCE
#define current(i) true /* a plain HSET */
#else
#define current(i) (st == running && tok == mine[i])
#endif

/* A fault may happen while fewer than MAXFAULTS have. */
#define fault atomic { faults < MAXFAULTS -> faults++ }

proctype delivery(byte i) {
	byte got;
claim:
	atomic {
		if
		:: st == done -> goto acked                      /* Duplicate */
		:: st == running && live && !reenters(i) -> got = 0 /* InProgress */
		:: else ->                                       /* Acquired */
			tok = (tok == 255 -> 1 : tok + 1); /* wraps past 0: 0 is no token */
			st = running; live = true; owner = identity(i);
			if
			:: mine[i] = tok; got = tok
			:: faults < MAXFAULTS -> faults++; got = 0 /* the reply was lost */
			fi
		fi
	}
	if
	:: got == 0 -> goto claim /* asynq retries (after the lease) */
	:: else
	fi;
	/* the handler runs */
	if
	:: fault; mine[i] = 0; goto claim /* crash; asynq redelivers */
	:: atomic { faults < MAXFAULTS -> faults++; if :: current(i) -> st = failed; live = false :: else -> skip fi };
		mine[i] = 0; goto claim     /* handler error: Release, then retry */
	:: atomic {
		if
		:: current(i) -> st = done; live = false; completions++;
			assert(completions <= 1)
		:: else -> skip                  /* ErrLeaseLost: nothing written */
		fi
	   }
	   mine[i] = 0;
	   if
	   :: st == done -> goto acked
	   :: else -> goto claim
	   fi
	fi;
acked:
	skip
}

/* Time: a lease nobody holds ends; a held one only as a fault (a holder
 * paused past its lease). */
active proctype clock() {
end:
	do
	:: atomic { st == running && live && orphan -> live = false }
	:: atomic { st == running && live && !orphan && faults < MAXFAULTS -> faults++; live = false }
	od
}

init {
	atomic { run delivery(0); run delivery(1); run delivery(2) }
}

ltl eventually_done { <> (st == done) }
