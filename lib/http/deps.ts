import type { AgentDefinition } from '../agent.ts';
import type { EventBuffer, Notifier } from '../ports.ts';
import type { AnswerDeps } from '../waits/answer.ts';
import type { SigningKeySource } from '../waits/signing-key.ts';
import type { AuthThrottle } from './auth-throttle.ts';
import type { LongPolls } from './long-polls.ts';

/** What the HTTP app needs: the engine's ports for one agent, and the wait services. */
export interface HttpDeps extends AnswerDeps {
  /** The agent whose runs this API starts (one stack, or one `stepwise serve`, per agent). */
  agent: AgentDefinition;
  signingKey: SigningKeySource;
  events?: EventBuffer;
  /** Where approval emails go: a delete of a run deletes those it keeps (an outbox's files). */
  notifier?: Notifier;
  /**
   * A bearer token required on the program routes (everything but the approval pages). `stepwise serve`
   * sets one unless told otherwise; on AWS, IAM authorizes those routes at API Gateway instead.
   */
  apiToken?: string;
  /**
   * Holds back an address's refused requests past a few a minute (429): `stepwise serve` sets one. Unset on
   * AWS, where API Gateway's stage throttle does it for every Lambda instance at once.
   */
  authThrottle?: AuthThrottle;
  /** Holds each address's long polls of GET /runs/:id to a cap (429 past it): `stepwise serve` sets one. */
  longPolls?: LongPolls;
  /**
   * The queue is this agent's alone (SQS; the table may be shared with other agents): an event resumes
   * only this agent's runs, whose workers read it. Unset on SQLite, where each message carries its run's agent.
   */
  agentQueue?: boolean;
  /**
   * The path a proxy serves this app under, which it takes off before passing a request on (/stepwise for
   * STEPWISE_PUBLIC_URL https://host/stepwise): the inspector's links, redirects and cookie carry it.
   */
  pathPrefix?: string;
  /**
   * Aborted when the server is stopping (`stepwise serve` told SIGTERM): a long poll of GET /runs/:id in hand
   * answers at its next look with the run as it stands, rather than hold the stop until its connection is cut.
   * Read at each look: no request adds a listener to a signal that lives as long as the server.
   */
  stopping?: AbortSignal;
}
